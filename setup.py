"""Build glue: lib/ is the package `topiclake`, plus the native kernels (C): record decoder, cleaner, Avro decoder."""

from setuptools import Extension, find_packages, setup

setup(
    packages=["topiclake"] + [f"topiclake.{name}" for name in find_packages("lib")],
    package_dir={"topiclake": "lib"},
    # lake/spark's data: the JVM's quiet log4j2 configuration, the pom Delta's jars are resolved from, and
    # the Delta LogStore's Java source (compiled at install)
    package_data={"topiclake.lake.spark": ["log4j2.properties", "pom.xml", "java/io/topiclake/delta/*.java"],
                  "topiclake.console": ["templates/*.html", "static/*.css"]},
    ext_modules=[
        Extension(
            "topiclake.segments._native._decode",
            sources=["lib/segments/_native/decode.c", "lib/segments/_native/batch_walk.c",
                     "lib/segments/_native/crc32c.c"],
            depends=["lib/segments/_native/record_fast.h", "lib/segments/_native/batch_walk.h",
                     "lib/segments/_native/crc32c.h"],
            extra_compile_args=["-O3"],
            optional=False,
        ),
        Extension(
            "topiclake.segments._native._compact",
            sources=["lib/segments/_native/compact.c"],
            extra_compile_args=["-O3"],
            optional=False,
        ),
        Extension(
            "topiclake.lake.typed._native._avro",
            sources=["lib/lake/typed/_native/avro.c"],
            extra_compile_args=["-O3"],
            optional=False,
        ),
    ],
)
