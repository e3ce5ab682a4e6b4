"""easy: an RL-trained orchestrator for heterogeneous LLM and tool pools. The layers and how a
task moves through them: docs/ARCHITECTURE.md."""
