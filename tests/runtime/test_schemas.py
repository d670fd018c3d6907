import json

import jsonschema

from runtime.resources import examples_dir, schemas_dir
from runtime.schemas import SCHEMAS, render


def test_committed_schemas_are_current():
    for name, make in SCHEMAS.items():
        committed = (schemas_dir() / name).read_text(encoding="utf-8")
        assert committed == render(make()), f"{name} is stale: run python -m runtime.schemas"


def test_examples_match_the_asset_schema():
    schema = json.loads((schemas_dir() / "workflow-asset.schema.json").read_text())
    for path in examples_dir().glob("*.json"):
        jsonschema.validate(json.loads(path.read_text()), schema)
