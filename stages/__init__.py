"""Pipeline stages: one module per params.yaml section, each a `main(params) -> metrics` with a thin CLI."""
