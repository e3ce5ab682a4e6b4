"""`easy serve`: the milestone-plan-act loop behind an OpenAI-compatible endpoint, every request
on one shared dispatcher (`runtime.dispatcher`)."""
