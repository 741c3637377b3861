"""The RabbitMQ task backend (``amqp://``): :mod:`.backend` the backend, :mod:`.connection` connecting and the
shared publisher, :mod:`.consumer` a worker's consumer and deliveries, :mod:`.link` a consumer's connection in its
own I/O thread, :mod:`.topology` queue names, routes and the message format."""

from .backend import RabbitMQTaskBackend

__all__ = ["RabbitMQTaskBackend"]
