"""The demo app: an actor with a key and the commands that send."""
