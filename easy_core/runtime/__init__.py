"""How a plan runs and an episode proceeds: the task-fetching scheduler, resilience, the engines,
the milestone-plan-act loop, the policy interface, release and prefix scheduling."""
