"""The written-down contracts match the code."""
import re
from pathlib import Path

from opcost.config import schema
from opcost.rerun import RERUN_TABLE, rerun_table
from opcost.tables import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_data_contract_document_is_generated_from_code():
    assert (ROOT / "docs" / "data.md").read_text() == markdown(), "run: opcost schema > docs/data.md"


def _keys(node, prefix=""):
    for key, sub in node.get("properties", {}).items():
        yield prefix + key
        target, sub_prefix = sub, prefix + key + "."
        if "$ref" in sub:  # a shared definition (timing settings) is documented once, as `*.timing.<key>`
            target = schema()["$defs"][sub["$ref"].rsplit("/", 1)[1]]
            sub_prefix = f"*.{key}."
        yield from _keys(target, sub_prefix)
        extra = target.get("additionalProperties")
        if isinstance(extra, dict):
            yield from _keys(extra, prefix + key + ".<name>.")


def test_every_config_key_is_documented():
    doc = (ROOT / "config" / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)`", doc, flags=re.M))
    missing = sorted(set(_keys(schema())) - documented)
    assert not missing, f"config/README.md lacks {missing}"


def test_workflow_schema_is_the_library_schema():
    assert (ROOT / "workflow" / "schemas" / "config.schema.yaml").resolve() == \
        (ROOT / "src" / "opcost" / "schemas" / "config.schema.yaml").resolve()


def test_the_rerun_table_is_generated_from_the_stages_params():
    doc = (ROOT / "config" / "README.md").read_text()
    start, end = doc.index(RERUN_TABLE[0]), doc.index(RERUN_TABLE[1]) + len(RERUN_TABLE[1])
    assert doc[start:end] == "\n".join(rerun_table()), "paste opcost.rerun.rerun_table() into config/README.md"
