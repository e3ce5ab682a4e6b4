"""Training of the LLM orchestrator with TRL: the SFT warm start (`sft.py`) on teacher turns.
Models come from packages that ship their weights (`models.py`); nothing is downloaded."""
