# The Airflow image for docker-compose.yaml: Airflow plus the servebench library and its deps.
# GPU engines are not installed here (see DESIGN: they run in their own images on GPU hosts).
FROM apache/airflow:3.3.2-python3.11
COPY --chown=airflow:root requirements.txt pyproject.toml /opt/servebench/
COPY --chown=airflow:root include /opt/servebench/include
RUN pip install --no-cache-dir -r /opt/servebench/requirements.txt \
 && pip install --no-cache-dir --no-deps -e /opt/servebench
