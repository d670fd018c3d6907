"""JSON Schemas generated from the models, written to ``resources/schemas``.

Run ``python -m runtime.schemas`` after changing a model; a test fails while a
committed schema differs from what the models generate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.asset.model import Asset
from runtime.diagnostics import turn_diagnostics_schema
from runtime.resources import schemas_dir


def workflow_asset_schema() -> dict[str, Any]:
    schema = Asset.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Parley Studio workflow asset"
    return schema


def test_suite_schema() -> dict[str, Any]:
    from runtime.suites.file import suite_schema

    return suite_schema()


def scene_schema() -> dict[str, Any]:
    from runtime.scene.model import SceneAsset

    schema = SceneAsset.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Parley Studio scene (several NPCs in one conversation)"
    return schema


def serve_openapi_schema() -> dict[str, Any]:
    from runtime.serve.app import openapi_schema

    return openapi_schema()


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "workflow-asset.schema.json": workflow_asset_schema,
    "turn-diagnostics.schema.json": turn_diagnostics_schema,
    "test-suite.schema.json": test_suite_schema,
    "scene.schema.json": scene_schema,
    "serve-openapi.json": serve_openapi_schema,  # parley serve's API (docs/serving.md)
}


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def write_all(directory: Path | None = None) -> list[Path]:
    directory = directory or schemas_dir()
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in SCHEMAS.items():
        path = directory / name
        path.write_text(render(make()), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_all():
        print(path)
