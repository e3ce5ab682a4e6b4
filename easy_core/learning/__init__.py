"""What turns episodes into models: traces, rollouts, trees, SFT data, SFT, GRPO, learned-policy
training, and the recipes that rebuild reported checkpoints."""
