from opcost.config import validate as validate_config, workloads
from opcost.errors import OpcostError

try:
    validate_config(config)  # JSON schema, defaults filled in; one line naming the key on error
except OpcostError as e:
    raise WorkflowError(str(e)) from None

WORKLOADS = workloads(config)
CHUNKS = list(range(config["profile"]["chunks"]))
ENV = "../../envs/opcost.yaml"


wildcard_constraints:
    model="[^/]+",
    mode="inference|training",
    batch="[0-9]+",
    chunk="[0-9]+",


def get_layer_tables(wildcards=None):
    return [f"results/layers/{m}/{mode}_b{b}.parquet" for m, mode, b in WORKLOADS]


def get_e2e_tables(wildcards=None):
    return [f"results/e2e/{m}/{mode}_b{b}.parquet" for m, mode, b in WORKLOADS]


def get_profile_chunks(wildcards=None):
    return [f"results/profile/chunk{c}.parquet" for c in CHUNKS]


def get_insitu_tables(wildcards=None):
    return [f"results/insitu/{m}/{mode}_b{b}.parquet" for m, mode, b in WORKLOADS]
