"""The types of opcost's data contracts: a table, its columns, the key every per-workload table starts with, and
:func:`frame`, through which every table opcost writes passes (column set, order and types enforced). The tables
themselves: :mod:`opcost.tables` (the database's and the stages') and :mod:`opcost.trace_tables` (the traces')."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # pandas dtype: "string", "Int64", "Float64", "boolean"
    doc: str
    optional: bool = False  # writers may leave it out: :func:`frame` fills it with missing values


@dataclass(frozen=True)
class Table:
    name: str
    path: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def column(name, dtype, doc, optional=False) -> Column:
    """A :class:`Column` (the tables' short constructor)."""
    return Column(name, dtype, doc, optional)


MODEL_KEY = (
    column("model", "string", "model name (config key under `models`)"),
    column("batch", "Int64", "batch size"),
    column("mode", "string", "`inference` (forward under inference_mode), `training` (forward + loss + backward), "
                             "`decode<L>` (one token per sequence over a key/value cache of L tokens) or `prefill<P>` "
                             "(generate()'s first call: a prompt of P tokens into an empty cache); the operators' "
                             "configurations and measurements of the last two: `inference`"),
)


def frame(table: Table, rows) -> pd.DataFrame:
    """A DataFrame with exactly ``table``'s columns, in order and with its types; extra or missing keys raise
    (an optional column missing is filled with missing values)."""
    df = pd.DataFrame(list(rows) if not isinstance(rows, pd.DataFrame) else rows)
    if df.empty and len(df.columns) == 0:
        df = pd.DataFrame(columns=table.names)
    absent = [c.name for c in table.columns if c.optional and c.name not in df.columns]
    if absent:
        df = df.assign(**dict.fromkeys(absent, pd.NA))
    extra = set(df.columns) - set(table.names)
    missing = set(table.names) - set(df.columns)
    if extra or missing:
        raise ValueError(f"table {table.name}: extra columns {sorted(extra)}, missing {sorted(missing)}")
    return df[table.names].astype({c.name: c.dtype for c in table.columns})
