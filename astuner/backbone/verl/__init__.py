"""The verl backbone's pieces; verl, ray and torch are imported only inside the modules that need them."""
