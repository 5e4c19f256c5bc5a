"""The recipes: one script per stage and one YAML per backbone × layout, shipped in the wheel as `trl_dpr.recipes`
(`trl-dpr <stage> --config <backbone>/<stage>/config_<layout>.yaml`). See recipes/README.md."""
