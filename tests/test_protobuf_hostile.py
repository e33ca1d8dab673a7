"""Protobuf read as an attacker or an unlucky user writes it (issue 61): descriptors that grow
without bound, and bytes that protobuf-java's ``DynamicMessage`` (what ``from_protobuf`` parses
with) treats otherwise than upb. Each test failed on the decoder before its fix; the expected
values are what Spark's ``ProtobufDeserializer`` gives over ``DynamicMessage`` (protobuf-java
4.29.3, the version Spark 4.x shades, run beside these bytes while the tests were written)."""

from __future__ import annotations

import pytest
from registry_double import RegistryDouble
from test_protobuf_decode import FIELD, built, proto_file

from kafkasync_source.formats.options import PROTOBUF


def test_a_message_whose_type_would_outgrow_the_budget_is_refused_naming_the_option():
    """Fourteen messages that each hold the next one twice: a 700-byte descriptor whose Spark
    type has 2^15 fields (30 such levels held the query's start for hours)."""
    twice = [("a", 1), ("b", 2)]
    messages = {f"M{i}": [(name, number, FIELD.TYPE_MESSAGE, f".shop.M{i + 1}") for name, number in twice]
                for i in range(14)}
    messages["M14"] = [("x", 1, FIELD.TYPE_INT32)]
    file, _ = built(proto_file("dag", messages))
    double = RegistryDouble()
    schema_id = double.add_protobuf(file)
    with pytest.raises(ValueError, match=rf"Option 'value.decode': the reader schema \(id {schema_id}, subject "
                                         r"'topic-value'\)'s message shop.M0 gives a Spark type of more than 10,000"):
        double.options(PROTOBUF, schema_id, record_name="shop.M0").spark_type()
