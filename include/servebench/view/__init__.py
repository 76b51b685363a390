"""What people open: the Benchmarks board the Airflow UI mounts (``board``) and two runs side
by side (``compare``, shared by the board's compare page and ``servebench compare``)."""
