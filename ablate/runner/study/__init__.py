"""Studies: what a study is, from its YAML and overrides to the list of trials (and the search spec)."""
