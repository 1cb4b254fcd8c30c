"""Source topics as external assets, and the sensor that observes their lag."""
