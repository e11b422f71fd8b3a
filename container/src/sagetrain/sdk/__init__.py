"""The SageMaker Python SDK v3's own container drivers (``ModelTrainer`` with ``SourceCode``), met in this
image: the top floor of the package. The image's ``.pth`` hook imports ``sdk.v3`` at every interpreter
start, so its top level imports only what costs nothing; the rest (config, launch) it imports downward,
inside the functions that run only in an SDK driver's process. Nothing below this package imports it."""
