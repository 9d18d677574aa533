"""What the screens ask of the engine beyond a run: replay and compare, behind small interfaces."""
