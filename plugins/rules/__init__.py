"""hacfg's built-in lint rules, one module per rule family, each registered as its own plugin."""
