"""Development tools run from a checkout, outside the boost-tenancy distribution.

devtools.local_broker runs the local ActiveMQ broker that tests, demos and benchmarks use.
"""
