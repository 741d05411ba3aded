"""The flow engine: abstract values and state, torch semantics, and the interpreter that
runs a module to a fixpoint and records `gradguard.facts`."""
