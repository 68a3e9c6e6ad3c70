<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Internal\LeakReport;
use PHPUnit\Framework\TestCase;

/** The framework-neutral leak report of workers.debug_leaks: what it names, and its line. */
final class LeakReportTest extends TestCase
{
    /** @var list<string> */
    private array $lines = [];

    protected function tearDown(): void
    {
        unset($GLOBALS['peregrine_leak_probe']);
    }

    public function testNamesTheGlobalsAndStaticsARequestChanged(): void
    {
        $probe = new class () {
            /** @var list<string> */
            public static array $seen = [];
        };
        $report = $this->report();

        $GLOBALS['peregrine_leak_probe'] = 'A';
        $probe::$seen[] = 'A';
        $report->after(['reset by the test' => ['Some::$thing']]);
        $this->assertCount(1, $this->lines);
        $this->assertMatchesRegularExpression('/^peregrine leaks: request 1 left behind: .*::\$seen, \$GLOBALS\[peregrine_leak_probe\]; reset by the test: Some::\$thing; memory \d+ bytes \(\+0\)$/s', $this->lines[0]);

        // Unchanged since: not named again (PHPUnit's own count of assertions is).
        $report->after(['reset by the test' => []]);
        $this->assertMatchesRegularExpression('/^peregrine leaks: request 2 left behind: [^;]*; reset by the test: nothing; memory \d+ bytes \([+-]\d+\)$/', $this->lines[1]);
        $this->assertStringNotContainsString('$seen', $this->lines[1]);
        $this->assertStringNotContainsString('peregrine_leak_probe', $this->lines[1]);
    }

    public function testWarnsWhenMemoryGrowsAfterEveryRequest(): void
    {
        $report = $this->report();
        $GLOBALS['peregrine_leak_probe'] = [];
        for ($i = 0; $i <= LeakReport::WINDOW; ++$i) {
            $GLOBALS['peregrine_leak_probe'][] = str_repeat('x', 100000);
            $report->after();
        }
        $warnings = preg_grep('/^peregrine leaks: WARNING memory grew after each of the last 20 requests/', $this->lines);
        $this->assertCount(1, $warnings, implode("\n", $this->lines));
    }

    private function report(): LeakReport
    {
        return new LeakReport(function (string $line): void {
            $this->lines[] = $line;
        });
    }
}
