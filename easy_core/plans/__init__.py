"""What a plan is beyond its schema: parsing and validation, the prompt an orchestrator reads,
and the schemas that constrain decoding to valid plans."""
