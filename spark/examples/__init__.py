"""Runnable jobs that publish with the ``amqp`` sink into a broker (ours on 127.0.0.1:5672 by
default). Each is one command and prints its progress:

    python -m spark.examples.batch_iris --uri amqp://guest:guest@127.0.0.1:5672/%2F
    python -m spark.examples.streaming_rate --uri amqp://guest:guest@127.0.0.1:5672/%2F

``batch_iris`` needs scikit-learn installed (it reads the iris CSV file shipped inside it);
``streaming_rate`` needs nothing but the ``spark`` extra.
"""
