# Image of the sample pipeline services (docker-compose.yml); one image, one command per service.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY boost_tenancy ./boost_tenancy
# The services are not part of the package: they run from /app, the working directory.
COPY services ./services
RUN pip install --no-cache-dir ".[services,postgres,metrics]"
RUN useradd --create-home boost && mkdir -p /data && chown boost /data
USER boost
ENV BOOST_LOG_FORMAT=json
