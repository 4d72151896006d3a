"""The Gymnasium environment: the episode core, the two action modes, spaces, wrappers, reward and
lambda, rollouts and group stepping."""
