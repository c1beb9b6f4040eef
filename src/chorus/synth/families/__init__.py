"""Family generators; each module registers its families with @chorus.synth.family."""
