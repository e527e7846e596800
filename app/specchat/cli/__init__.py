"""`specchat ...`: the command line, over the engine, the models, the app, the API and the benchmark."""
