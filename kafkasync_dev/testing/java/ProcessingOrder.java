/*
 * Kafka Streams' own processing order of the records in some topics, for the test that compares
 * kafkasync's batches with it (integration/test_kafka_streams_order.py). Compiled and run by
 * kafkasync_dev/testing/kafka_streams.py against the official kafka-streams jars from Maven
 * Central (maven/kafka-streams.pom.xml).
 *
 *   java -cp <classes>:<kafka-streams libs>/* ProcessingOrder BOOTSTRAP APPLICATION_ID STATE_DIR \
 *        RECORDS TIMEOUT_SECONDS TOPIC...
 *
 * A Kafka Streams application reads the topics from the earliest offset, the time of each
 * record taken from its JSON value's "ts" field (milliseconds since the epoch) by
 * JsonTsExtractor, the default.timestamp.extractor. For each of the first RECORDS records its
 * processor sees it writes "topic partition offset ts" to stdout, in processing order; then it
 * closes and exits 0. Exit 1: the application failed (the error on stderr); exit 2: fewer than
 * RECORDS records were processed within TIMEOUT_SECONDS.
 *
 * Kafka Streams merges by time only the partitions of one task: partition p of each source
 * topic. Topics of one partition each (subscribed together) give one task that merges them all.
 *
 * -Dkafkasync.extractor=CLASS replaces JsonTsExtractor (e.g. AvroFieldExtractor, compiled beside
 * this file with Apache Avro on the classpath); every other -Dkafkasync.* system property is
 * put into the Streams config, where a Configurable extractor reads its settings.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;

public final class ProcessingOrder {

    /**
     * The record's time: its JSON value's top-level "ts", an integer (ms since the epoch). A
     * value without one fails the application (a test's data always has one): no fallback to
     * the Kafka timestamp, which would change the order the test checks.
     */
    public static final class JsonTsExtractor implements TimestampExtractor {
        // Jackson comes with kafka-streams (a runtime dependency of its pom).
        private static final ObjectMapper JSON = new ObjectMapper();

        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            Object value = record.value();
            if (!(value instanceof byte[])) {
                throw new IllegalArgumentException(where(record) + ": the value is not bytes: " + value);
            }
            JsonNode ts;
            try {
                ts = JSON.readTree((byte[]) value).get("ts");
            } catch (IOException e) {
                throw new IllegalArgumentException(where(record) + ": the value is not JSON: " + e.getMessage(), e);
            }
            if (ts == null || !ts.isIntegralNumber() || !ts.canConvertToLong() || ts.longValue() < 0) {
                throw new IllegalArgumentException(where(record) + ": no non-negative integer \"ts\" in "
                        + new String((byte[]) value, StandardCharsets.UTF_8));
            }
            return ts.longValue();
        }

        private static String where(ConsumerRecord<Object, Object> record) {
            return record.topic() + "-" + record.partition() + " offset " + record.offset();
        }
    }

    public static void main(String[] args) throws InterruptedException, ClassNotFoundException {
        if (args.length < 6) {
            System.err.println("usage: ProcessingOrder BOOTSTRAP APPLICATION_ID STATE_DIR RECORDS TIMEOUT_SECONDS TOPIC...");
            System.exit(64);
        }
        String bootstrap = args[0];
        String applicationId = args[1];
        String stateDir = args[2];
        int records = Integer.parseInt(args[3]);
        long timeoutSeconds = Long.parseLong(args[4]);
        List<String> topics = Arrays.asList(args).subList(5, args.length);

        Properties config = new Properties();
        config.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        config.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        // The default, set to say so. 0 (KIP-695): a task whose buffer of some partition is
        // empty does not wait for producers, but it does wait to fetch records the broker
        // already has (the partition's fetched lag is unknown or above 0): records present on
        // the broker are processed in timestamp order. -1 would process whatever is buffered,
        // in an order that depends on fetch timing; above 0 would only add waiting at the end.
        config.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, 0L);
        String extractor = System.getProperty("kafkasync.extractor");
        config.put(StreamsConfig.DEFAULT_TIMESTAMP_EXTRACTOR_CLASS_CONFIG,
                extractor == null ? JsonTsExtractor.class : Class.forName(extractor));
        for (String name : System.getProperties().stringPropertyNames()) {
            if (name.startsWith("kafkasync.") && !name.equals("kafkasync.extractor")) {
                config.put(name, System.getProperty(name));
            }
        }
        config.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        List<String> order = new ArrayList<>(records);  // written by the stream thread only
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<Throwable> failure = new AtomicReference<>();

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(topics, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .process(() -> new Processor<byte[], byte[], Void, Void>() {
                    private ProcessorContext<Void, Void> context;

                    @Override
                    public void init(ProcessorContext<Void, Void> context) {
                        this.context = context;
                    }

                    @Override
                    public void process(Record<byte[], byte[]> record) {
                        RecordMetadata where = context.recordMetadata().orElseThrow();
                        synchronized (order) {
                            if (order.size() < records) {
                                order.add(where.topic() + " " + where.partition() + " " + where.offset() + " "
                                        + record.timestamp());
                            }
                            if (order.size() >= records) {
                                done.countDown();
                            }
                        }
                    }
                });

        KafkaStreams streams = new KafkaStreams(builder.build(), config);
        streams.setUncaughtExceptionHandler(exception -> {
            failure.compareAndSet(null, exception);
            done.countDown();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.ERROR) {
                failure.compareAndSet(null, new IllegalStateException("Kafka Streams went from " + before + " to ERROR"));
                done.countDown();
            }
        });
        streams.start();
        boolean finished = done.await(timeoutSeconds, TimeUnit.SECONDS);
        streams.close(Duration.ofSeconds(30));

        List<String> processed;
        synchronized (order) {
            processed = new ArrayList<>(order);
        }
        PrintStream out = System.out;
        for (String line : processed) {
            out.println(line);
        }
        out.flush();
        if (failure.get() != null) {
            System.err.println("ProcessingOrder: Kafka Streams failed after " + processed.size() + " records:");
            failure.get().printStackTrace();
            System.exit(1);
        }
        if (!finished) {
            System.err.println("ProcessingOrder: only " + processed.size() + " of " + records
                    + " records processed within " + timeoutSeconds + " s");
            System.exit(2);
        }
        System.exit(0);
    }
}
