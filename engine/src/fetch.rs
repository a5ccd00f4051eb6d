//! Model aliases and the cached fetch of the default model.
