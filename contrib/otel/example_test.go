package slidelogotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slidelog/slidelog"
	slidelogotel "github.com/slidelog/slidelog/contrib/otel"
)

func ExampleNew() {
	// In production: your SDK MeterProvider with its exporter, or none
	// (slidelogotel.New() uses the global one). Here a manual reader, to
	// print what was recorded.
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	hook, err := slidelogotel.New(slidelogotel.WithMeterProvider(provider))
	if err != nil {
		panic(err)
	}

	mr := miniredis.NewMiniRedis() // in production: your Redis
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer func() { _ = rdb.Close() }()

	limiter := slidelog.New(rdb, slidelog.WithName("api"), slidelog.WithHook(hook))
	ctx := context.Background()
	for range 4 {
		_, _ = limiter.Allow(ctx, "user42", slidelog.PerSecond(3))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				outcome, _ := dp.Attributes.Value("outcome")
				fmt.Printf("%s{outcome=%s} %d\n", m.Name, outcome.Emit(), dp.Value)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				outcome, _ := dp.Attributes.Value("outcome")
				fmt.Printf("%s{outcome=%s} %d observations (%s)\n", m.Name, outcome.Emit(), dp.Count, m.Unit)
			}
		}
	}
	// Unordered output:
	// slidelog.decisions{outcome=allowed} 3
	// slidelog.decisions{outcome=denied} 1
	// slidelog.decision.duration{outcome=allowed} 3 observations (s)
	// slidelog.decision.duration{outcome=denied} 1 observations (s)
}
