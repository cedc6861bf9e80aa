"""Trinity-RFT configs as tune()'s config_path: translated to astuner's tree (see config.py)."""
