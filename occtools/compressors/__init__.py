"""The compressor sweep (`compressors`) and the lossless-coding measurement on dumped pipeline
messages (`entropy-report`)."""
