/*
 * A Kafka Streams TimestampExtractor that reads a record's time from a field of its
 * Confluent-framed Avro value, as a Kafka Streams user with Confluent's Avro serde writes one:
 * magic byte 0, a 4-byte big-endian schema id, then the Avro binary encoding of the record.
 * The writer schema comes from the Schema Registry by id (GET /schemas/ids/{id}, the Confluent
 * API), once per id; the record is decoded with it (Apache Avro's GenericDatumReader), and the
 * field path is followed through nested records (e.g. "source.ts_ms", Debezium's commit time).
 *
 * Configured through the Streams config (Kafka Streams configures a Configurable extractor
 * with its originals): kafkasync.registry.url (the registry's Confluent-compatible base URL)
 * and kafkasync.avro.field (the dotted path). ProcessingOrder.java puts them there from the
 * -Dkafkasync.* system properties kafkasync_dev/testing/kafka_streams.py passes.
 *
 * A long or int field is epoch milliseconds; timestamp-micros and local-timestamp-micros are
 * divided by 1000 (Avro's logical types). A record without the field, or not framed, fails the
 * application naming the record: no fallback to the Kafka timestamp, which would change the
 * order the test checks.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.apache.avro.LogicalType;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.Configurable;
import org.apache.kafka.streams.processor.TimestampExtractor;

public final class AvroFieldExtractor implements TimestampExtractor, Configurable {
    public static final String REGISTRY_URL = "kafkasync.registry.url";
    public static final String FIELD = "kafkasync.avro.field";

    private static final ObjectMapper JSON = new ObjectMapper();
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    private final Map<Integer, GenericDatumReader<GenericRecord>> readers = new HashMap<>();
    private String registryUrl;
    private String[] path;

    @Override
    public void configure(Map<String, ?> configs) {
        Object url = configs.get(REGISTRY_URL);
        Object field = configs.get(FIELD);
        if (url == null || field == null) {
            throw new IllegalArgumentException(REGISTRY_URL + " and " + FIELD + " must be set");
        }
        registryUrl = url.toString().replaceAll("/+$", "");
        path = field.toString().split("\\.");
    }

    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
        Object value = record.value();
        if (!(value instanceof byte[])) {
            throw new IllegalArgumentException(where(record) + ": the value is not bytes: " + value);
        }
        byte[] bytes = (byte[]) value;
        if (bytes.length < 5 || bytes[0] != 0) {
            throw new IllegalArgumentException(where(record) + ": not Confluent-framed (magic byte 0, 4-byte id)");
        }
        int id = ByteBuffer.wrap(bytes, 1, 4).getInt();
        GenericRecord decoded;
        try {
            decoded = reader(id).read(null, DecoderFactory.get().binaryDecoder(bytes, 5, bytes.length - 5, null));
        } catch (IOException e) {
            throw new IllegalArgumentException(where(record) + ": cannot decode with schema " + id + ": " + e, e);
        }
        Object node = decoded;
        Schema schema = decoded.getSchema();
        for (String name : path) {
            if (!(node instanceof GenericRecord) || ((GenericRecord) node).getSchema().getField(name) == null) {
                throw new IllegalArgumentException(where(record) + ": no field " + String.join(".", path));
            }
            GenericRecord parent = (GenericRecord) node;
            schema = nonNull(parent.getSchema().getField(name).schema());
            node = parent.get(name);
        }
        if (!(node instanceof Long) && !(node instanceof Integer)) {
            throw new IllegalArgumentException(where(record) + ": " + String.join(".", path) + " is not a number: " + node);
        }
        long time = ((Number) node).longValue();
        LogicalType logical = schema.getLogicalType();
        if (logical != null && logical.getName().endsWith("timestamp-micros")) {
            time = Math.floorDiv(time, 1000L);
        }
        return time;
    }

    /** The writer schema's reader, fetched from the registry at the first record with its id. */
    private GenericDatumReader<GenericRecord> reader(int id) throws IOException {
        GenericDatumReader<GenericRecord> reader = readers.get(id);
        if (reader == null) {
            HttpRequest request = HttpRequest.newBuilder(URI.create(registryUrl + "/schemas/ids/" + id))
                    .timeout(Duration.ofSeconds(30)).GET().build();
            HttpResponse<String> response;
            try {
                response = http.send(request, HttpResponse.BodyHandlers.ofString());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted fetching schema " + id, e);
            }
            if (response.statusCode() != 200) {
                throw new IOException("GET " + request.uri() + ": HTTP " + response.statusCode() + " " + response.body());
            }
            Schema schema = new Schema.Parser().parse(JSON.readTree(response.body()).get("schema").asText());
            reader = new GenericDatumReader<>(schema);
            readers.put(id, reader);
        }
        return reader;
    }

    /** An optional field's schema (a union with null) as its one other branch. */
    private static Schema nonNull(Schema schema) {
        if (schema.getType() != Schema.Type.UNION) {
            return schema;
        }
        for (Schema branch : schema.getTypes()) {
            if (branch.getType() != Schema.Type.NULL) {
                return branch;
            }
        }
        return schema;
    }

    private static String where(ConsumerRecord<Object, Object> record) {
        return record.topic() + "-" + record.partition() + " offset " + record.offset();
    }
}
