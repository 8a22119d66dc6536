"""Layer 3: many devices. Clusters, parallel plans, collectives, pipeline schedules, memory, training steps."""
