"""What is measured: models and the operator calls of their iterations.

``sources`` builds a configured model (torchvision, built-in, timm, Hugging Face, ``module:callable``) with random
weights and example inputs; ``workload`` is one model at one batch size and mode; ``extract`` records every
operator call of an iteration and deduplicates them into configurations; ``opspec`` describes tensors and
arguments as JSON and synthesizes them back; ``replay`` rebuilds one configuration as a callable for the timers;
``sweeps`` makes chains of identical layers for operator configurations no model has.
"""
