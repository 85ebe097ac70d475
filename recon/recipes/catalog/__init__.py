"""One module per recipe; importing a module registers its recipe."""
