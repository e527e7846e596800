"""Model files: GGUF headers, draft/target compatibility, the catalog, local paths and downloads."""
