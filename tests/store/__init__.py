"""Tests of topiclake.store: roots, the object-store client and its metrics, against a real versitygw."""
