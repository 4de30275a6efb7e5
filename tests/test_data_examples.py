"""The pandas and DuckDB examples of docs/data.md select the rows `opcost predict` uses, on a merged database of two
hosts: run as written (only their settings lines changed) and compared with the library and `opcost db show`."""
import contextlib
import io as text_io
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from opcost import database, io
from opcost.analysis import estimate
from opcost.measure.engine import ENGINE_OP_TYPE
from opcost.model.sweep_points import PREFIX as SWEEP_PREFIX

ROOT = Path(__file__).resolve().parents[1]
OTHER = "other-host"


def _block(lang: str) -> str:
    """The one fenced ``lang`` block of docs/data.md."""
    blocks = re.findall(rf"^```{lang}\n(.*?)^```$", (ROOT / "docs" / "data.md").read_text(), flags=re.M | re.S)
    assert len(blocks) == 1, f"docs/data.md: expected one {lang} example, found {len(blocks)}"
    return blocks[0]


def _set(text: str, start: str, line: str) -> str:
    """``text`` with its one line that starts with ``start`` replaced by ``line``."""
    lines = text.splitlines()
    hits = [i for i, ln in enumerate(lines) if ln.startswith(start)]
    assert len(hits) == 1, f"the example's settings line {start!r} not found once"
    lines[hits[0]] = line
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def merged(tiny_run, tmp_path_factory):
    """The tiny run's database merged by `opcost db merge` with a copy relabelled as a second host whose rows are
    an hour newer and twice as slow (a query that ignores the host, or takes the newest row whatever its host,
    gets that host's costs or both hosts' summed)."""
    tmp = tmp_path_factory.mktemp("examples")
    own = tiny_run / "results" / "db"
    db = database.read_db(own)
    other = tmp / "other"
    for name, table in database.DB_TABLES.items():
        df = db[name]
        if name in database.RUN_TABLES:
            later = df["timestamp"].map(lambda t: (pd.Timestamp(t) + pd.Timedelta(hours=1)).isoformat())
            seconds = [c for c in df.columns if c.endswith("_s")]
            df = df.assign(host=OTHER, timestamp=later, **{c: df[c] * 2 for c in seconds})
        io.write_parquet(df, other / f"{name}.parquet", table)
    out = tmp / "merged"
    subprocess.run([sys.executable, "-m", "opcost.cli", "db", "merge", str(own), str(other), "--out", str(out)],
                   capture_output=True, text=True, check=True)
    m = database.read_db(out)["measurements"]
    host = next(h for h in m["host"].unique() if h != OTHER)
    return out, host


def _conditions(m: pd.DataFrame, host: str) -> dict:
    return {"host": host, "device": "cpu", "threads": int(m.loc[m["host"] == host, "threads"].iloc[0])}


def test_the_merged_database_holds_what_a_careless_query_gets_wrong(merged):
    """Two hosts, and on the tiny config's two-tier host configurations with both a rotation row and a
    back-to-back all-fast-tier row, both `baseline`."""
    out, host = merged
    m = database.read_db(out)["measurements"]
    assert set(m["host"]) == {host, OTHER}
    ok = m[(m["source"] == "isolated") & (m["status"] == "ok") & m["baseline"].fillna(False).astype(bool)
           & (m["host"] == host)]
    rotated = ok["cache"].isin(["fresh", "rotation"]).fillna(False).astype(bool)
    both = ok.assign(rotated=rotated).groupby(["config_id", "phase"])["rotated"].agg(["any", "all"])
    assert (both["any"] & ~both["all"]).any(), ok[["config_id", "phase", "cache", "placement"]]


@pytest.mark.parametrize("which", ["own", "other"])
def test_pandas_example_takes_the_rows_predict_takes(merged, which):
    out, host = merged
    db = database.read_db(out)
    want = _conditions(db["measurements"], host if which == "own" else OTHER)
    code = _set(_block("python"), "db, host, device, threads = ",
                f"db, host, device, threads = {str(out)!r}, {want['host']!r}, {want['device']!r}, {want['threads']}")
    ns: dict = {}
    printed = text_io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/data.md (python)", "exec"), ns)
    assert "out_features" in printed.getvalue()  # the tiny mlp has Linear layers: the printout is not empty
    used, picked = estimate.conditions(db["measurements"], **want)
    assert {k: str(v) for k, v in picked.items()} == {k: str(v) for k, v in want.items()}
    cols = ["config_id", "phase", "cache", "placement", "timestamp", "trimmed_mean_s"]
    key = ["config_id", "phase"]
    mine = ns["cost"][cols].sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, used[cols].sort_values(key).reset_index(drop=True), check_dtype=False)
    assert len(mine) == len(mine.drop_duplicates(key))
    # `opcost db show` of these conditions lists every candidate row; the example keeps one of them per key
    shown = subprocess.run([sys.executable, "-m", "opcost.cli", "db", "show", "--db", str(out), "--host",
                            want["host"], "--device", "cpu", "--source", "isolated", "--csv"],
                           capture_output=True, text=True, check=True).stdout
    shown = pd.read_csv(text_io.StringIO(shown))
    shown = shown[(shown["threads"] == want["threads"]) & (shown["status"] == "ok")]
    both = mine.merge(shown, on=key)
    assert set(map(tuple, mine[key].values)) == set(map(tuple, shown[key].values))
    hit = both.assign(same=(both["cost_s"] - both["trimmed_mean_s"]).abs() <= 1e-12 * both["cost_s"].abs().max())
    assert hit.groupby(key)["same"].any().all()
    assert len(shown) > len(mine)  # db show lists the back-to-back rows too: summing it counts them twice


def _sql(out: Path, want: dict, workload: tuple) -> pd.DataFrame:
    model, batch, mode = workload
    sql = _set(_block("sql"), "SET VARIABLE conditions = ",
               f"SET VARIABLE conditions = {{'db': '{out}', 'host': '{want['host']}', 'device': '{want['device']}', "
               f"'threads': {want['threads']}}};")
    sql = _set(sql, "SET VARIABLE workload = ",
               f"SET VARIABLE workload = {{'model': '{model}', 'batch': {batch}, 'mode': '{mode}'}};")
    return duckdb.connect().execute(sql).df()


def test_duckdb_example_sums_a_workload_as_predict_does(merged):
    out, host = merged
    db = database.read_db(out)
    layers = db["layers"][~db["layers"]["model"].str.startswith(SWEEP_PREFIX)]  # the models' workloads
    workloads = [tuple(w) for w in layers[["model", "batch", "mode"]].drop_duplicates().values]
    checked = 0
    for which in (host, OTHER):
        want = _conditions(db["measurements"], which)
        for model, batch, mode in workloads:
            got = _sql(out, want, (model, int(batch), mode))
            layers = estimate.workload_layers(db, model, int(batch), mode)
            rows = estimate.predict_workload(db, layers, **want).layers
            rows = rows[(rows["method"] == "measured") & (rows["op_type"] != ENGINE_OP_TYPE)]
            expected = rows.groupby(["op_type", "phase"])["total_s"].sum()
            expected = {(str(t), str(p)): float(v) for (t, p), v in expected.items()}
            got = {(str(t), str(p)): float(v) for t, p, v in got[["op_type", "phase", "seconds_per_iteration"]].values}
            assert got.keys() == expected.keys(), (model, batch, mode)
            assert all(got[k] == pytest.approx(expected[k], rel=1e-9) for k in got), (got, expected)
            checked += 1
    assert checked >= 6  # every model workload of the tiny run (mlp, tiny_dlrm inference and training), on each host


def test_a_query_that_ignores_conditions_would_be_caught(merged):
    """The check above can fail: the former example's selection (every baseline row, no host filter, no one row
    per configuration) gives another answer on this database."""
    out, host = merged
    db = database.read_db(out)
    want = _conditions(db["measurements"], host)
    model, batch, mode = db["layers"][["model", "batch", "mode"]].iloc[0]
    right = _sql(out, want, (model, int(batch), mode))["seconds_per_iteration"].sum()
    careless = duckdb.connect().execute(f"""
        SELECT sum(l.count * m.trimmed_mean_s) FROM '{out}/layers.parquet' l
        JOIN '{out}/measurements.parquet' m USING (config_id)
        WHERE l.model = '{model}' AND l.batch = {batch} AND l.mode = '{mode}' AND m.source = 'isolated'
          AND m.baseline""").fetchone()[0]
    assert careless > 2.5 * right  # both hosts (the second twice as slow) and the back-to-back rows again


def test_the_hosts_example_lists_each_host_and_run_of_a_merged_database(merged):
    from opcost.queries import HOSTS

    out, host = merged
    code = HOSTS.replace('"results/db/e2e.parquet"', repr(str(out / "e2e.parquet")))
    assert code != HOSTS and f"    {HOSTS.splitlines()[-1]}" in (ROOT / "docs" / "data.md").read_text()
    printed = text_io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/data.md (hosts)", "exec"), {})
    text = printed.getvalue()
    assert host in text and OTHER in text and "count" in text, text
