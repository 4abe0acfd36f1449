"""How a config becomes bytes and a launch: one subpackage per backend."""
