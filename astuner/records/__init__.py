"""Run records under `{exp_dir}/{experiment_name}/`."""

from astuner.records.run_dir import RunDir, prepare_run_dir

__all__ = ["RunDir", "prepare_run_dir"]
