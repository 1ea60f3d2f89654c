"""Reinforcement learners: multi-task SAC, its networks and replay buffer, the stable-baselines3 adapter."""
