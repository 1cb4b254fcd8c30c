"""The staging area asset, the stage job that materializes it, and the sensors that launch
stage runs and observe the staging area."""
