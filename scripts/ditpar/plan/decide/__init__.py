"""How the chooser decides: ranking, the seven gates, bands and the short list, the report."""
