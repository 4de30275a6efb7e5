"""A cost model per operator type and phase, fitted from the database, for configurations it never measured.

**Baseline** (per ``(op_type, mode, phase)`` with at least :data:`MIN_CONFIGS` measured configurations): a roofline with
a per-call floor, ``t = floor + max(flops / compute_rate, bytes / memory_rate)``, its three non-negative parameters
fitted to the measured configurations by least squares on log time (relative error; a soft-L1 loss so that one noisy
configuration does not pull the law). **Correction**: gradient-boosted trees (scikit-learn's
``HistGradientBoostingRegressor``, op type as a categorical feature) on the log ratio of the measured cost to the
baseline, from the shape features of :mod:`opcost.analysis.features` (``law+trees``), and a second set that also sees
the workload around the configuration (``law+trees+context``; :func:`~opcost.analysis.training.context_bytes`: the bytes
the operators of the workload it was profiled among move per iteration; for an estimate, those of the workload
predicted). Which of the three estimates are used is chosen per mode by held-out error: K-fold cross-validation with the
folds grouped by the model each configuration was profiled among, its batch sizes together, and the sweep points kept in
every fold's training (so that a held-out configuration is estimated as in a model never profiled, from the sweeps and
the other models, without the configurations measured beside it), each fold refitting the laws and the trees without it;
the methods whose median |log error| per configuration is within one standard error of the lowest are averaged
(their estimates' geometric mean, labelled ``averaged``; one better by more is used alone: :meth:`CostModel._choose`).
The held-out errors of the estimate chosen give every estimate its interval (the 5th to 95th
percentile of the held-out ratios of its op type, or of all types where it has fewer than :data:`MIN_INTERVAL` of them).

**Layouts**: a convolution whose input or weights PyTorch reads as channels last, or whose input is in neither
order (copied to NCHW first), runs other kernels at other rates than the plain NCHW one
(:func:`opcost.analysis.features.layout`); its rows are keyed by the layout variant (``Conv2d@strided``,
:func:`by_layout`), which has a law of its own where measured and else takes the op type's as a ``twin``.

An op type with too few measured configurations falls back to a labelled rule: ``nearest``, the measured
configuration of that type and phase nearest in (log FLOPs, log bytes), scaled by the ratio of its family's law
(else the phase's global law) at the two configurations (without either, by the ratio of bytes; FLOPs for matrix
products and convolutions); an op type never measured in that phase, ``twin``: the law of a measured type of the same
computation (its twin group in :data:`opcost.analysis.optypes.TABLE`: an aten op and the module that calls it,
``adaptive_avg_pool2d`` and ``AdaptiveAvgPool2d``; clamps, ``ReLU6`` and ``ReLU``), else ``family``: the law
fitted over the measured types of its family (the table's family: ``Mish`` from the other activations,
``bernoulli_`` from dropout...; with fewer than :data:`MIN_CONFIGS` of them, the nearest, scaled), else ``global``:
the roofline law fitted over all configurations of the phase. The family's and the phase's laws are fitted to the
configurations that do work (FLOPs or bytes); a configuration without work (a view) estimated from its family costs
the median of the family's measured ones. Nothing is ever estimated as 0.

**Held-out error of every rule.** The laws' and trees' come from the cross-validation below; the fallbacks' from
leaving each measured op type out in turn (:meth:`CostModel._leave_type_out`: its law, points and lines taken out,
the shared laws refitted without it) and estimating its configurations by whichever fallback then
answers, each type counting once. An estimate's 90% interval is the 5-95% range of the held-out errors of its own
rule (:meth:`CostModel.interval_of`): a fallback's, else its op type's, else all types'; where
nothing was held out (a small database), a factor of 2 either way; never narrower than :data:`MIN_WIDTH`.

**Monotone**: an estimate is held between the measured costs of its shape line that differ from it by one size (no
less than the same call measured at a smaller batch, sequence or context, no more than at a larger one), so that it
never falls as that size grows past what was measured.

**Interpolated**: a configuration that two measured ones of its shape line bracket (the same call but for the
sizes of its tensors, between the two at every size that differs: attention over a cache length between two
measured ones, a batch between two measured; :mod:`opcost.analysis.shape_lines`) takes the log-log interpolation
of their costs, before any law: the measured curve at its points, where one roofline law per op type misses a
last-level-cache crossing.

Every estimate row says its ``method`` (``interpolated``, ``law``, ``law+trees``, ``law+trees+context``,
``averaged``, ``nearest``, ``twin``, ``family`` or ``global``). The model is fitted to one set of measurement
conditions (host, device, threads: :func:`opcost.database.conditions`) and kept in the user's cache
(:func:`~opcost.analysis.training.cache_path`), with a fingerprint of the rows it was fitted to: a database that changed
since is refitted, never answered from a stale model.
:meth:`CostModel.uncertainty` is the error to expect where nothing is measured nearby (held-out errors grow with the
distance to the nearest measured configuration).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from opcost.analysis import fallbacks, heldout, optypes
from opcost.analysis.features import NUMERIC, features
from opcost.analysis.heldout import MIN_INTERVAL
from opcost.analysis.laws import fit_law, peak_rates, typical_rates
from opcost.analysis.shape_lines import Lines, lines
from opcost.model.modes import op_mode

MIN_CONFIGS = 3  # measured configurations of a type and phase needed to fit its own law
MIN_WORKLOAD = 5  # configurations of a held-out workload for its summed error to be reported
FOLDS = 5
FIT_VERSION = 37  # part of a saved model's fingerprint: a model fitted by an older method is refitted
CONTEXT = "log_context_bytes"  # a feature of the trees: log10 of the bytes the surrounding workload moves
TREES = {"law+trees": False, "law+trees+context": True}  # the corrections: method -> whether the trees see CONTEXT
METHODS = ("law", *TREES)  # what the cross-validation chooses from, per mode, simplest first
FALLBACKS = ("nearest", "twin", "family", "global")  # estimates of a type without a law of its own
AVERAGED = "averaged"  # the label of an estimate that is the geometric mean of several methods (CostModel._choose)
PRIOR = math.log(2.0)  # |log error| assumed where nothing was held out: a factor of 2 either way
MIN_WIDTH = 0.04  # the narrowest interval, in log ratio (about ±2%): the spread of any fit's own held-out errors


@dataclass
class CostModel:
    """Fitted laws, trees and interval quantiles for one target column (seconds or joules) of one set of
    measurement conditions; :meth:`estimate` answers for any `layers` rows."""

    target: str
    laws: dict = field(default_factory=dict)  # (op_type, mode, phase) -> Law
    global_laws: dict = field(default_factory=dict)  # (mode, phase) -> Law
    family_laws: dict = field(default_factory=dict)  # (family, mode, phase) -> Law (configurations with work)
    family_calls: dict = field(default_factory=dict)  # (family, mode, phase) -> median seconds of those without
    trees: dict = field(default_factory=dict)  # method (a key of TREES) -> fitted trees
    chosen_by_mode: dict = field(default_factory=dict)  # mode -> the methods of METHODS its estimates average
    categories: list = field(default_factory=list)
    points: pd.DataFrame | None = None  # measured configurations: key columns, flops, bytes, y, family
    quantiles: dict = field(default_factory=dict)  # op_type -> (q05, q95) of held-out log ratios; None: all types
    heldout: pd.DataFrame | None = None  # per configuration and phase: held-out log ratio of each method
    error_growth: tuple = (0.0, 0.0)  # (a, b): held-out |log error| ~ a + b x decades to the nearest measured
    fingerprint: str = ""
    lines: Lines | None = None  # measured configurations by shape line, for ``interpolated`` estimates
    fallback: pd.DataFrame | None = None  # per configuration: held-out log ratio of its fallback, its type unmeasured
    method_quantiles: dict = field(default_factory=dict)  # fallback method -> (q05, q95) of its held-out log ratios
    peaks: dict = field(default_factory=dict)  # (mode, phase) -> the fastest FLOP rate measured: peak_rates
    typical: dict = field(default_factory=dict)  # (mode, phase) -> (compute, memory) rates: typical_rates
    model_error: dict = field(default_factory=dict)  # mode -> (half-width, models) of a model's log error: model_spread
    in_model: object = None  # opcost.analysis.in_model.InModel of the rows timed alone and in order (training)

    # -- fitting -----------------------------------------------------------------------------------------------
    @classmethod
    def fit(cls, data: pd.DataFrame, target: str = "seconds", folds: int = FOLDS) -> "CostModel":
        """``data``: one row per measured (configuration, phase): `layers` columns (op_type, mode, params,
        inputs, outputs), ``phase``, the positive ``target`` value and, optionally, :data:`CONTEXT`, ``workload``
        (the workload the configuration was profiled among: the cross-validation's groups) and ``count`` (its calls
        per iteration there: its weight in that workload's held-out sum)."""
        data = data[data[target].astype(float) > 0].reset_index(drop=True)
        data = data.assign(mode=data["mode"].map(op_mode))  # a decode step's operators are inference operators
        feats = features(data)
        line, dims = lines(data, data["mode"])
        data = pd.concat([data[["config_id", "op_type", "mode", "phase", target]], feats], axis=1).assign(
            line=line, dims=dims,
            **{CONTEXT: data[CONTEXT] if CONTEXT in data else np.nan,
               "workload": data["workload"] if "workload" in data else None,
               "count": data["count"].fillna(1) if "count" in data else 1})
        data = by_layout(data)
        data["family"] = _families(data)  # once: every fit and fold reads it
        model = cls._fit_once(data, target)
        model.heldout = held = cls._cross_validate(data, target, folds)
        if len(held):
            chosen = held["law"].copy()
            for mode, g in held.groupby("mode"):
                best = model._choose(g)
                if best is not None:
                    model.chosen_by_mode[mode] = best
                    chosen[g.index] = g[list(best)].mean(axis=1)  # a log ratio: the geometric mean's
            held["chosen"] = chosen
            # what to expect where nothing is measured nearby: the estimates of the laws, not those interpolated
            # between two measured neighbours (small at any distance: they would flatten the growth)
            apart = held["method"] != "interpolated"
            model.error_growth = heldout.error_growth(held.loc[apart, "distance"], chosen[apart].abs())
            sums = heldout.workload_errors(held.assign(chosen=chosen), ["chosen"])
            for mode, g in sums[sums["configs"] >= MIN_WORKLOAD].groupby("mode"):
                model.model_error[mode] = heldout.model_spread(g, "chosen")
            share = heldout.time_shares(held, heldout.model_groups(held))
            model.quantiles = {None: heldout.quantiles(chosen, share)}
            for op_type, g in chosen.groupby(model.heldout["op_type"]):
                if len(g) >= MIN_INTERVAL:
                    model.quantiles[op_type] = heldout.quantiles(g, share[g.index])
        model.fallback = model._leave_type_out(data, target)
        model.method_quantiles = heldout.method_quantiles(model.fallback, held, FALLBACKS)
        return model

    @classmethod
    def _fit_once(cls, data: pd.DataFrame, target: str) -> "CostModel":
        model = cls(target=target)
        y = data[target].astype(float)
        model.peaks = peak_rates(data, y)
        groups = {key: g for key, g in data.groupby(["op_type", "mode", "phase"]) if len(g) >= MIN_CONFIGS}
        for key, g in groups.items():
            model.laws[key] = fit_law(g["flops"], g["bytes"], y[g.index], model.peaks.get(key[1:]))
        model.typical = typical_rates(model.laws)
        for key, g in groups.items():  # a rate nothing measured: at least the phase's typical
            law = model.laws[key]
            if not (law.compute_known and law.memory_known) and key[1:] in model.typical:
                model.laws[key] = fit_law(g["flops"], g["bytes"], y[g.index], model.peaks.get(key[1:]),
                                          model.typical[key[1:]])
        model._fit_shared(data, y)
        model.points = data[["op_type", "mode", "phase", "flops", "bytes", "log_flops", "log_bytes"]].assign(
            y=y, family=data["family"])
        if "line" in data:
            model.lines = Lines.of(data["line"], data["dims"], data["bytes"], data["flops"], y, data[CONTEXT])
        base = fallbacks.baseline(model, data)[0]
        ok = np.isfinite(base)
        if ok.sum() >= 20:
            from sklearn.ensemble import HistGradientBoostingRegressor

            model.categories = sorted(data["op_type"].unique())
            target_ratio = np.log(y[ok].to_numpy() / base[ok])
            for method, context in TREES.items():
                if context and data.loc[ok, CONTEXT].isna().all():  # no context known: nothing to learn from it
                    continue
                x = model._matrix(data[ok], context)
                # the surroundings' bytes only ever slow an operator (what they evict it must fetch again): the
                # correction never falls as they grow, so that an operator whose shape does not change (a decode
                # step's Linears across context lengths) never gets cheaper in a workload that moves more
                monotone = [0] * (x.shape[1] - 1) + [1 if context else 0]
                with one_thread():
                    model.trees[method] = HistGradientBoostingRegressor(
                        max_iter=200, learning_rate=0.05, min_samples_leaf=5, categorical_features=[0],
                        random_state=0, monotonic_cst=monotone).fit(x, target_ratio)
        return model

    def _fit_shared(self, data: pd.DataFrame, y: pd.Series, families: set | None = None) -> None:
        """The laws several op types share, fitted to ``data`` (``y``: its target): each phase's global law and the
        laws and median calls of ``families`` (None: every family). They are fitted to the configurations that do
        work. A view costs its call alone, and the calls of a family's types differ (a module's flatten, an aten
        stack): a shared floor at most the cheapest call could only fit views that cost more than it with rates so
        low that every copy of the family came out milliseconds. A configuration without work estimated from its
        family costs the median of the family's measured ones."""
        worked = data["flops"].ge(1) | data["bytes"].ge(1)
        for key, g in data.groupby(["mode", "phase"]):
            if len(g) >= MIN_CONFIGS:
                g = _with_work(g, worked)
                self.global_laws[key] = fit_law(g["flops"], g["bytes"], y[g.index], self.peaks.get(key),
                                                self.typical.get(key))
        family = data["family"]
        keep = family.notna() if families is None else family.isin(families)
        for key, g in data[keep].groupby([family[keep], "mode", "phase"]):
            if len(g) >= MIN_CONFIGS:
                w = _with_work(g, worked)
                self.family_laws[key] = fit_law(w["flops"], w["bytes"], y[w.index], self.peaks.get(key[1:]),
                                                self.typical.get(key[1:]))
            idle = g[~worked[g.index]]
            if len(idle):
                self.family_calls[key] = float(y[idle.index].median())

    @classmethod
    def _cross_validate(cls, data: pd.DataFrame, target: str, folds: int) -> pd.DataFrame:
        """Held-out log(estimate / measured) per row and method, the folds split by the model of the workload each
        configuration was profiled among (``workload``; a configuration's phases together, a model's workloads
        together, a sweep point's batch sizes together): a held-out configuration is estimated as for a model never
        profiled, without the configurations measured beside it, which share its workload's context and its errors,
        nor those of the model's other batch sizes, which share its shapes. ``distance``: its decades to the nearest
        configuration of its type in the training folds."""
        from sklearn.model_selection import GroupKFold

        from opcost.model.sweep_points import PREFIX

        group = heldout.model_groups(data)
        if data["config_id"].nunique() < 2 * folds or group.nunique() < folds:
            return pd.DataFrame(columns=["config_id", "op_type", "mode", "phase", "workload", "count", "measured",
                                         "method", *METHODS, "distance"])
        # Sweep points stay in every fold's training where there are models enough to hold out, as they stay in the
        # database a model never profiled is predicted from; else they are held out like models.
        swept = group.str.startswith(PREFIX).to_numpy()
        if group[~swept].nunique() < folds:
            swept[:] = False
        heldable = np.flatnonzero(~swept)
        out = []
        for train_at, test_at in GroupKFold(n_splits=folds).split(heldable, groups=group.iloc[heldable]):
            train_at = np.concatenate([heldable[train_at], np.flatnonzero(swept)])
            train, test = data.iloc[train_at], data.iloc[heldable[test_at]]
            m = cls._fit_once(train, target)
            meas = test[target].astype(float).to_numpy()
            baseline = fallbacks.baseline(m, test)  # once per fold: each method corrects the same laws
            row = {"config_id": test["config_id"], "op_type": test["op_type"], "mode": test["mode"],
                   "phase": test["phase"], "workload": test["workload"].fillna(test["config_id"]),
                   "count": test["count"].to_numpy(dtype=float), "measured": meas,
                   "method": baseline[1]}
            for name in METHODS:  # trees correct only the fitted laws (a fold without them: the law)
                row[name] = np.log(m._estimated(test, name, baseline)[0] / meas)
            out.append(pd.DataFrame({**row, "distance": m.distance(test)}))
        return pd.concat(out, ignore_index=True)

    def _leave_type_out(self, data: pd.DataFrame, target: str) -> pd.DataFrame:
        """Held-out errors of the fallbacks: each measured op type in turn estimated as if the database had never
        measured it (its own law, points and shape lines taken out, its family's and its phase's laws refitted
        without it), by whichever fallback then answers (``twin``, ``family``, ``nearest`` of the family,
        ``global``). One row per configuration: ``op_type``, ``mode``, ``phase``, ``method``, ``ratio`` (log
        estimate / measured) and ``weight`` (the configuration's share of the type's measured time, count x
        target: every op type counts once, as a type never measured is one draw of them, and within it the
        configurations that carry a workload's time weigh most). The trees correct only a type's own law, so none
        is refitted."""
        rows = []
        y = data[target].astype(float)
        for op_type, test in data.groupby("op_type"):
            rest = data[data["op_type"] != op_type]
            if rest.empty:
                continue
            m = self._without(op_type, test["family"].iloc[0], rest, y[rest.index])
            est, method = fallbacks.baseline(m, test)
            ok = np.isfinite(est) & (est > 0)
            if not ok.any():
                continue
            time = test["count"].to_numpy(dtype=float)[ok] * y[test.index].to_numpy()[ok]
            rows.append(pd.DataFrame({"config_id": test["config_id"].to_numpy()[ok], "op_type": op_type,
                                      "mode": test["mode"].to_numpy()[ok], "phase": test["phase"].to_numpy()[ok],
                                      "method": method[ok], "ratio": np.log(est[ok] / y[test.index].to_numpy()[ok]),
                                      "weight": time / time.sum()}))
        cols = ["config_id", "op_type", "mode", "phase", "method", "ratio", "weight"]
        return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=cols)

    def _without(self, op_type: str, fam: str | None, rest: pd.DataFrame, y: pd.Series) -> "CostModel":
        """A copy of this model's laws and points as if ``op_type`` had never been measured (``rest``: the
        training rows without it, ``y`` their target; ``fam``: its family): its own laws and shape lines dropped,
        the shared laws of its family and of each phase refitted to ``rest``."""
        m = CostModel(target=self.target, categories=self.categories, peaks=self.peaks, typical=self.typical)
        m.laws = {k: v for k, v in self.laws.items() if k[0] != op_type}
        m.points = self.points[self.points["op_type"] != op_type]
        m.family_laws = {k: v for k, v in self.family_laws.items() if k[0] != fam}
        m.family_calls = {k: v for k, v in self.family_calls.items() if k[0] != fam}
        m._fit_shared(rest, y, {fam} if fam is not None else set())
        if "line" in rest:
            m.lines = Lines.of(rest["line"], rest["dims"], rest["bytes"], rest["flops"], y, rest[CONTEXT])
        return m

    def _choose(self, held: pd.DataFrame) -> tuple[str, ...] | None:
        """The methods of :data:`METHODS` (in their order) whose median |log error| over the held-out configurations
        of one mode is within one standard error of the lowest (the error's standard error from
        :data:`~opcost.analysis.heldout.BOOTSTRAP` resamples of the held-out models): those the held-out models cannot
        tell apart, whose estimates are averaged (their geometric mean); None: nothing of it was estimated. Per
        configuration, not per held-out workload's sum: a choice by the sums of the fifteen to twenty model workloads
        changed with the model left out of the database, mostly against that model. Averaged, not the simplest of
        them: on 120 models never profiled the three methods came out equally close (70%, 67% and 71% within ±15%)
        while one model's estimate moved by up to 17% between them, and the choice of one flipped with four
        configurations more or less in the database; their mean came out as close (72%) with intervals a third
        narrower (docs/methodology.md, "Methods the held-out errors cannot tell apart")."""
        err = held[self.methods()].abs()
        per_config = err.median()
        if per_config.isna().all():
            return None
        best = str(per_config.idxmin())
        margin = heldout.bootstrap_se(err[best], heldout.model_groups(held))
        return tuple(m for m in self.methods() if per_config[m] <= per_config[best] + margin)

    # -- estimating --------------------------------------------------------------------------------------------
    def _matrix(self, data: pd.DataFrame, context: bool) -> np.ndarray:
        code = data["op_type"].map({t: i for i, t in enumerate(self.categories)}).astype(float).to_numpy()
        phase = (data["phase"] == "backward").astype(float).to_numpy()
        mode = (data["mode"] == "training").astype(float).to_numpy()
        cols = [code, phase, mode, data[list(NUMERIC)].astype(float).to_numpy()]
        return np.column_stack(cols + [data[CONTEXT].astype(float).to_numpy()] if context else cols)

    def _estimated(self, data: pd.DataFrame, how, baseline=None) -> tuple[np.ndarray, np.ndarray]:
        """(estimate, method) per row of a feature frame: the laws and fallbacks, and the law rows corrected by the
        trees of ``how``: a method of :data:`METHODS` or a tuple of them (their estimates' geometric mean, labelled
        :data:`AVERAGED` where there are several), or one such per row (a method that was not fitted: the law).
        ``baseline``: :func:`~opcost.analysis.fallbacks.baseline` of ``data`` when already computed."""
        base, method = baseline if baseline is not None else fallbacks.baseline(self, data)
        how = [(h,) if isinstance(h, str) else tuple(h) for h in
               ([how] * len(data) if how is None or isinstance(how, (str, tuple)) else how)]
        lawful = method == "law"
        log_sum, parts = np.zeros(len(data)), np.array([len(h) for h in how], dtype=float)
        for name in self.trees:
            rows = lawful & np.array([name in h for h in how], dtype=bool)
            if rows.any():
                with one_thread():
                    log_sum[rows] += self.trees[name].predict(self._matrix(data[rows], TREES[name]))
        est = np.where(lawful, base * np.exp(log_sum / np.maximum(parts, 1.0)), base)
        label = np.array([h[0] if len(h) == 1 else AVERAGED for h in how], dtype=object)
        known = np.array([all(m == "law" or m in self.trees for m in h) for h in how], dtype=bool)
        method = np.where(lawful & known, label, method)
        return self._monotone(data, est), method

    def _monotone(self, data: pd.DataFrame, est: np.ndarray) -> np.ndarray:
        """``est`` held between the measured costs of its shape line that differ from it by one size, among those
        measured in workloads of about its context (:meth:`opcost.analysis.shape_lines.Lines.bounds`): no less than
        the same call measured at a smaller batch, sequence or context, no more than at a larger one, whatever the
        trees' correction."""
        if self.lines is None or "line" not in data:
            return est
        out = est.copy()
        context = data[CONTEXT] if CONTEXT in data else pd.Series(np.nan, index=data.index)
        for i, (line, dims, ctx) in enumerate(zip(data["line"], data["dims"], context)):
            if line and np.isfinite(out[i]):
                lo, hi = self.lines.bounds(line, dims, float(ctx))
                out[i] = min(max(out[i], lo), hi) if lo <= hi else out[i]
        return out

    @staticmethod
    def features_of(rows: pd.DataFrame) -> pd.DataFrame:
        """The feature frame of `layers` rows with ``phase`` (what :meth:`distance` reads)."""
        keys = rows[["op_type", "mode", "phase"]].assign(mode=rows["mode"].map(op_mode))  # decode: inference
        line, dims = lines(rows, keys["mode"])
        out = pd.concat([keys.reset_index(drop=True),
                         features(rows).reset_index(drop=True)], axis=1).assign(line=line, dims=dims)
        out[CONTEXT] = rows[CONTEXT].to_numpy(dtype=float) if CONTEXT in rows else np.nan
        return by_layout(out)

    def distance(self, data: pd.DataFrame) -> np.ndarray:
        """Per row of a feature frame: decades (the larger of the log FLOPs and log bytes differences) to the
        nearest measured configuration of its op type, mode and phase; missing where none is measured."""
        out = np.full(len(data), np.nan)
        groups = self.points.groupby(["op_type", "mode", "phase"]).indices
        at = self.points[["log_flops", "log_bytes"]].to_numpy(dtype=float)
        x = data[["log_flops", "log_bytes"]].to_numpy(dtype=float)
        for i, key in enumerate(zip(data["op_type"], data["mode"], data["phase"])):
            pos = groups.get(key)
            if pos is not None:
                out[i] = float(np.abs(at[pos] - x[i]).max(axis=1).min())
        return out

    def uncertainty(self, rows: pd.DataFrame) -> np.ndarray:
        """Per row of ``rows`` (as for :meth:`estimate`): the expected |log error| of its estimate, ``a + b x d``
        for ``d`` decades to the nearest measured configuration of its type (:attr:`error_growth`, fitted to the
        cross-validation's held-out errors of the estimates not interpolated); an op type never measured counts 1
        decade beyond the farthest row."""
        if rows.empty:
            return np.zeros(0)
        d = self.distance(self.features_of(rows))
        far = (np.nanmax(d) if np.isfinite(d).any() else 0.0) + 1.0
        a, b = self.error_growth
        return a + b * np.where(np.isfinite(d), d, far)

    def estimate(self, rows: pd.DataFrame, method: str | None = None) -> pd.DataFrame:
        """Per row of ``rows`` (`layers` columns, ``phase`` and, for the context trees, :data:`CONTEXT`):
        ``estimate``, ``low``, ``high`` (in the target's unit) and ``method``; missing estimate only where the
        database holds nothing of that mode and phase. ``method``: one of :data:`METHODS` for every law row
        (a side-by-side comparison); default: the one the cross-validation chose for the row's mode."""
        if method is not None and method not in METHODS:
            raise ValueError(f"cost model method {method!r}: one of {', '.join(METHODS)}")
        data = self.features_of(rows)
        how = method or [self.chosen_by_mode.get(m, ("law",)) for m in data["mode"]]
        est, method = self._estimated(data, how)
        lo, hi = np.array([self.interval_of(t, m) for t, m in zip(data["op_type"], method)]).reshape(-1, 2).T
        # a held-out ratio r = log(estimate / measured): the measured value lies in [estimate / e^q95, estimate / e^q05]
        return pd.DataFrame({"estimate": est, "low": est / np.exp(np.maximum(hi, 0)),
                             "high": est / np.exp(np.minimum(lo, 0)), "method": method}, index=rows.index)

    def interval_of(self, op_type: str, method: str) -> tuple[float, float]:
        """(q05, q95) of the held-out log ratios (estimate / measured) an estimate of ``op_type`` by ``method``
        rests on: a fallback's (:data:`FALLBACKS`) from the leave-type-out errors of that fallback
        (:attr:`method_quantiles`), else the op type's own held-out errors, else all types'; where none was held
        out (a small database), the widest known, else :data:`PRIOR` either way; never narrower than
        :data:`MIN_WIDTH`: an estimate never has an interval of zero width."""
        q = self.method_quantiles.get(method) if method in FALLBACKS else None
        if q is None:
            q = self.quantiles.get(op_type) or self.quantiles.get(None)
        if q is None:
            known = [*self.quantiles.values(), *self.method_quantiles.values()]
            q = (min((k[0] for k in known), default=-PRIOR), max((k[1] for k in known), default=PRIOR))
        lo, hi = min(q[0], 0.0), max(q[1], 0.0)
        if hi - lo < MIN_WIDTH:  # an interval narrower than the held-out noise of the fit itself says too much
            pad = (MIN_WIDTH - (hi - lo)) / 2
            lo, hi = lo - pad, hi + pad
        return lo, hi

    # -- held-out summary --------------------------------------------------------------------------------------
    def heldout_summary(self) -> dict:
        """Per method (and ``estimate``: the estimate the cost model makes, the mean of the methods chosen): the
        median |error| and the share within ±10% / ±25% of the held-out estimates per configuration (what
        :meth:`_choose` compares), and the median |error| and the mean |log error| of the held-out workloads' sums
        (workloads of at least :data:`MIN_WORKLOAD` configurations; ``workloads``: how many)."""
        if self.heldout is None or self.heldout.empty:
            return {}
        named = [*self.methods(), *(["chosen"] if "chosen" in self.heldout else [])]
        sums = heldout.workload_errors(self.heldout, named)
        sums = sums[sums["configs"] >= MIN_WORKLOAD]
        out = {"configurations": int(self.heldout["config_id"].nunique()), "workloads": len(sums),
               "chosen": self.chosen()}
        for m in named:
            err = np.exp(self.heldout[m]) - 1
            out["estimate" if m == "chosen" else m] = {
                "median_abs_error": float(err.abs().median()), "within_10pct": float((err.abs() <= .1).mean()),
                "within_25pct": float((err.abs() <= .25).mean()),
                "workload_median_abs_error": float((np.exp(sums[m]) - 1).abs().median()) if len(sums) else float("nan"),
                "workload_mean_abs_log_error": float(sums[m].abs().mean()) if len(sums) else float("nan")}
        return out

    def methods(self) -> list[str]:
        """The methods of :data:`METHODS` this model has (the context trees only where a context was known)."""
        return [m for m in METHODS if m == "law" or m in self.trees]

    def chosen(self) -> str:
        """The methods chosen per mode: ``inference: law and law+trees+context averaged, training: law+trees``."""
        return ", ".join(f"{mode}: {' and '.join(m)}{' averaged' if len(m) > 1 else ''}"
                         for mode, m in sorted(self.chosen_by_mode.items())) or "law"


def one_thread():
    """A context in which scikit-learn's trees run on one OpenMP thread. The cost model's few hundred rows give a
    thread too little work to wait for the others: the default study's fit (192 configurations, twelve sets of
    trees) took 75 s on this 2-core VM's two threads and 13 s on one."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="openmp")


def by_layout(data: pd.DataFrame) -> pd.DataFrame:
    """A feature frame whose rows in a layout other than the plain one (column ``layout``:
    :func:`opcost.analysis.features.layout`) are keyed by their layout variant (``Conv2d@strided``:
    :func:`opcost.analysis.optypes.variant`), their op type their ``base``: a layout measured often enough has a
    law of its own, and one never measured takes its op type's law as a twin."""
    order = data["layout"].fillna("").astype(str) if "layout" in data else None
    if order is None or not order.ne("").any():
        return data
    other = order.ne("")
    base = data["base"] if "base" in data else pd.Series(None, index=data.index, dtype=object)
    return data.assign(op_type=[optypes.variant(t, o) for t, o in zip(data["op_type"], order)],
                       base=base.where(~other | base.notna(), data["op_type"]))


def _families(data: pd.DataFrame) -> pd.Series:
    """The family of each row of a feature frame (``op_type``, ``base``)."""
    base = data["base"] if "base" in data else pd.Series(None, index=data.index)
    return pd.Series([optypes.family(t, b) for t, b in zip(data["op_type"], base)], index=data.index, dtype=object)


def _with_work(group: pd.DataFrame, worked: pd.Series) -> pd.DataFrame:
    """The rows of ``group`` that do work (FLOPs or bytes), where at least :data:`MIN_CONFIGS` do; else all."""
    w = group[worked[group.index]]
    return w if len(w) >= MIN_CONFIGS else group
