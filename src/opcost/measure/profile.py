"""Isolated profiling: each operator configuration timed alone, by the timing core, on the configured device."""
from __future__ import annotations

import pandas as pd

from opcost.measure.back_to_back import profile_back_to_back
from opcost.measure.energy import NoMeter, missing
from opcost.measure.profiling import ProfileSettings
from opcost.measure.rotation_engine import profile_rotation
from opcost.measure.timing import ROTATION_STATES


def profile_configs(configs: pd.DataFrame, models_cfg: dict, device: str, dtype: str, settings: ProfileSettings, *,
                    on_result=None, energy=None, context: pd.DataFrame | None = None,
                    on_e2e=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure every configuration (under each placement, when tiers are configured); returns (`measurements`
    rows, `samples` rows). The fields of ``settings`` (:class:`ProfileSettings`) below are named ``settings.X``.
    ``settings.cache`` is the state a call finds the machine in. ``fresh`` (default) and ``rotation``: configurations
    are timed in rotation, one call at a time (:func:`opcost.measure.rotation.measure_rotation`), so weights, code
    and the thread pool are as other operators left them, as in a model; with ``fresh`` each call reads what its
    producer just wrote: in model order and inference, an input that is a recorded call's output in the model (column
    `feeds`) is that call's output of the same round (:func:`opcost.measure.rotation.producer_feed`), and the other
    inputs are rewritten just before the call (untimed, :func:`opcost.model.replay.refresher`), as their producer would
    have written them. ``warm`` (inputs reused) and ``cold`` (inputs rotate over a pool larger than the last-level
    cache): each configuration alone, back-to-back calls.
    Placements other than the default (two or more usable tiers) are always measured back-to-back, each against
    its all-fast-tier reference measured the same way (``cold`` pools in the rotation states).

    Configurations flagged noisy are measured again, up to ``settings.remeasure`` more times (blocked: after all the
    others, at another moment of the machine's life; rotation: in another rotation of the same group, timing only them);
    per placement and phase the least noisy attempt is kept and ``attempts`` records how many were made.
    ``settings.visits`` (back-to-back states): each configuration is measured in passes over all of them until, per
    placement and phase, two of its measurements that are not noisy agree
    (:meth:`opcost.measure.timing.Measurement.agrees`), at most ``settings.visits`` + ``settings.remeasure`` times; the
    second visit samples until both visits' samples together meet the precision target
    (:func:`opcost.measure.timing.measure`'s ``prior``); the closest agreeing pair's samples are kept together, else the
    lower median of the measurements that are not noisy (a machine that was slow for a whole visit makes it slower,
    never faster). In rotation, with ``settings.visits`` > 1, the groups of sweep points are visited a second time
    after all others, merged the same way (:func:`opcost.measure.rotation_engine.merge_visits`). A configuration that
    cannot be replayed gets a row with status ``failed: ...`` and the others go on.
    ``on_result(rows, samples)`` is called once per finished configuration (the journal hook). ``energy(fn)`` returns
    the energy columns of a phase (default: missing, meter none). ``context``: configurations that rotate with them
    untimed and unrecorded, each with the configurations of its own workload (the profile stage passes all others: a
    chunk's or a loop iteration's configurations then run between the operators they follow in the model, not only among
    their own kind). ``settings.rotation_size``: at most this many configurations (context included) per rotation; a
    rotation's configurations are journaled together when it ends. ``settings.order``: a rotation's rounds in the
    workload's call order (``model``: a round is one iteration's call sequence, column `positions`, restricted to the
    rotation's configurations: each operator follows its predecessor in the model and is called as often as the model
    calls it; each call's output lives until the call where the model drops it, column `releases`) or each configuration
    once in an order shuffled every round (``shuffled``). ``settings.e2e_every`` > 0 with ``on_e2e``: every
    ``settings.e2e_every``-th round of each rotation ends with its workload's whole model iteration, timed after a
    lead-in of untimed iterations lasting about 5 ms (at least one: :func:`opcost.measure.rotation.lead_in`; shuffled:
    one iteration, anywhere in the round), and ``on_e2e(e2e_row, samples)`` receives the timed one (after iterations, as
    in a run) as an `e2e` row of method `rotation`: the end-to-end time of the same minutes as the operators (a
    prediction checked against an e2e run minutes apart inherits the machine's drift between the two). A workload that
    owns no configuration (:func:`~opcost.measure.rotation_engine.guest_workloads`) has its iterations timed likewise in
    each rotation that times one of its configurations."""
    energy = energy or (lambda fn: missing(NoMeter()))
    if settings.cache in ROTATION_STATES:
        return profile_rotation(configs, models_cfg, device, dtype, settings, on_result, energy, context, on_e2e)
    return profile_back_to_back(configs, models_cfg, device, dtype, settings, on_result, energy)
