"""Live recording in the browser: a WebSocket route of the annotator's server steps the environment."""
