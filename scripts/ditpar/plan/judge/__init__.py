"""How the chooser is judged: scoring published tables, held out by source, hardware class and framework."""
