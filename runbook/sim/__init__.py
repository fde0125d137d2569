"""The simulated world and the scenario model it plays, for drills and tests."""
