"""The OpenAPI document explains itself: every field of every schema carries a description (each field's docstring,
spec.fields.Documented), so the generated docs/reference/http-api.md does too."""

from benchd.api import create_app
from benchd.daemon.settings import Settings


def test_every_field_of_every_schema_has_a_description(tmp_path):
    document = create_app(Settings(database_url=f"sqlite:///{tmp_path}/benchd.db")).openapi()
    missing = [f"{name}.{field}" for name, schema in document["components"]["schemas"].items()
               for field, sub in (schema.get("properties") or {}).items() if not sub.get("description", "").strip()]
    assert not missing, f"{len(missing)} fields without a description: {', '.join(missing)}"
