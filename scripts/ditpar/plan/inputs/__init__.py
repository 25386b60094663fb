"""What the chooser is told: model and hardware presets, topology, framework profiles, in-house model files, calibration tables."""
