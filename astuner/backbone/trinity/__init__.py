"""The trinity backbone's pieces; trinity, ray and torch are imported only inside the modules that need them."""
