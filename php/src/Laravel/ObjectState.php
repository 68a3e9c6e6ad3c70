<?php

declare(strict_types=1);

namespace Peregrine\Laravel;

/**
 * ObjectState is the value of every property of one object at one moment (public, protected and
 * private, of its class and of each parent class), which it can put back later.
 *
 * Arrays are copied by value (PHP copies them lazily, so taking and restoring a state costs a
 * reference count, not a copy); objects held in properties are the same objects, not copies.
 * Static properties, readonly properties and typed properties not yet initialised are left out.
 *
 * @internal
 */
final class ObjectState
{
    /**
     * @param list<array{\Closure(object, array<string, mixed>): void, \Closure(object, array<string, mixed>): list<string>, array<string, mixed>}> $scopes
     *        per declaring class: its setter, its differ and its properties' values
     * @param array<string, mixed> $whole the object cast to an array: every property at once,
     *        compared in one operation to skip the objects a request did not touch
     */
    private function __construct(
        public readonly object $object,
        private readonly array $scopes,
        private readonly array $whole,
    ) {
    }

    /** Takes the state of $object now. */
    public static function of(object $object): self
    {
        $scopes = [];
        for ($class = new \ReflectionObject($object); $class !== false; $class = $class->getParentClass()) {
            $values = [];
            foreach ($class->getProperties() as $property) {
                if ($property->isStatic() || $property->class !== $class->name || $property->isReadOnly()
                    || !$property->isInitialized($object)) {
                    continue;
                }
                $property->setAccessible(true);
                $values[$property->name] = $property->getValue($object);
            }
            if ($values === []) {
                continue;
            }
            // Closures bound to the declaring class, so private properties of parents are reachable.
            $set = \Closure::bind(static function (object $o, array $values): void {
                foreach ($values as $name => $value) {
                    $o->$name = $value;
                }
            }, null, $class->name);
            $diff = \Closure::bind(static function (object $o, array $values): array {
                $changed = [];
                foreach ($values as $name => $value) {
                    if ($o->$name !== $value) {
                        $changed[] = $name;
                    }
                }

                return $changed;
            }, null, $class->name);
            $scopes[] = [$set, $diff, $values];
        }

        return new self($object, $scopes, (array) $object);
    }

    /** Puts every property back to the value it had when the state was taken. */
    public function restore(): void
    {
        if ((array) $this->object === $this->whole) {
            return;
        }
        foreach ($this->scopes as [$set, , $values]) {
            $set($this->object, $values);
        }
    }

    /**
     * Names the properties whose value differs from the state taken (an object property differs
     * when it holds another object, not when the same object changed inside).
     *
     * @return list<string>
     */
    public function changed(): array
    {
        if ((array) $this->object === $this->whole) {
            return [];
        }
        $changed = [];
        foreach ($this->scopes as [, $diff, $values]) {
            array_push($changed, ...$diff($this->object, $values));
        }

        return $changed;
    }
}
