"""Planning: recipe + overrides + environment spec -> a checked, immutable RunPlan. Pure."""
