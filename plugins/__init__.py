"""hacfg's built-in plugins, registered through the ``hacfg`` entry-point group like any other."""
